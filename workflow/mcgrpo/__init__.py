"""mcgrpo: compare GRPO training interventions at matched compute.

It implements the protocol of Singh et al., "Are Dense Rewards Worth Their Tokens in GRPO?", arXiv:2611.13560
(2026; full reference in README.md, docs/index.md and CITATION.cff). Comments and docstrings that cite "the paper"
by section, table or figure ("paper §C.1", "H.3", "Table 16") mean that paper.
"""

__version__ = "0.1.0"
