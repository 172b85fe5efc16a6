"""The public record: what the public may see, and how each change to it is written and announced (the public
join set, who may read what, the change feed, the outbox of the rollups, takedowns and the render cache's
version). Between the features and the kernel: docs/architecture.md "Layers"."""
