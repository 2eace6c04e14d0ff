"""``make harden``: the bad-input table (``cases``), test doubles (``doubles``) and the suite (``run``)."""
