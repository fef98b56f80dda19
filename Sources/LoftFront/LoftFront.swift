// The front: terminates loft sessions and dials their destinations.
