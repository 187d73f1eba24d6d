"""How one variant is timed: clocks, pinning, buffer placement, the allocator, turn-taking, the machine's state."""
