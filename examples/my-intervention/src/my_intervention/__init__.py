"""A template mcgrpo plugin: copy this folder, rename the package, and change the rules."""
