"""Other trainers under mcgrpo's protocol: trl (TRL's GRPOTrainer; the `trl` extra)."""
