"""Vector stores behind one contract (base.py). One module per store, one YAML per store in configs/backend/.

session.py opens, fills, times and cleans up a store (the only code that does); catalog.py says
which stores exist and what each is (embedded, local server, cloud); servers.py starts the local
servers on loopback.
"""
