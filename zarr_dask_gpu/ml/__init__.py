"""Machine learning: epoch plans, the shuffled training loader, torch tensors and state dicts."""
