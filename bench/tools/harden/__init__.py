"""``make harden``: bad input, planted secrets, store faults and load (see ``run``)."""
