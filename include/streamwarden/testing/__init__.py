"""What tests and benchmarks check the product with, never called by production: fault-injection points on the
commit path (:mod:`.faults`: nothing acts unless a ``STREAMWARDEN_CHAOS_*`` variable names a point; never set
them in production), the exactly-once oracle over a table's Delta log (:mod:`.exactly_once`), the reference
reader that replays the committed sessions (:mod:`.replay`) and a person answering Airflow's approval requests over
its REST API (:mod:`.approvals`).
"""
