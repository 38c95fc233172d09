"""Models of recent papers, written through the public extension API (docs/your_own_system.md)."""
