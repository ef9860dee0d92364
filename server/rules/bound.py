"""Rules of this family."""
