"""Experience bank (issue 13): the mechanism catalog, the protocol records, write-back and packs.

- :mod:`.mechanisms`: CATALOG of canonical mechanisms, ``mechanism_class``, ``normalize``;
- :mod:`.records`: the frozen Environment / Observation / Effect records the store hands out.
"""
