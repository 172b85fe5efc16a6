"""The shared kernel: plumbing every feature uses and that uses no feature (docs/architecture.md, "Layers")."""
