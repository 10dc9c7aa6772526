"""The adversarial matrix: attacks by an untrusted training job, each run for real through the trial path.

``cases`` lists the attacks and the predicate that says each was stopped; ``world`` builds the attacked target
repo; ``runner`` runs them (``infrarsi verify matrix`` prints them after the receipt matrix).  The attackers'
code lives in ``payloads/`` as plain files (data: it is never imported by infrarsi itself).
"""
