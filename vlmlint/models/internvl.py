"""Being written: see the family modules beside this one."""

FAMILY = None
