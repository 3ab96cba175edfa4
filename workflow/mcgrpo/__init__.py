"""mcgrpo: compare GRPO training interventions at matched compute."""

__version__ = "0.1.0"
