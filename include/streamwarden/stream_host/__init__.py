"""The stream host: the machine the stream's driver runs on, apart from Airflow's, reached over SSH.

The warden (in Airflow's worker) asks the stream host to launch or halt the stream (:mod:`.client`); the
host runs ``streamwarden launch`` or ``streamwarden halt`` (:mod:`.commands`) and answers with one JSON
document (:mod:`.answers`). Its SSH server lets the warden's key run those two commands only (:mod:`.gate`,
:mod:`.sshd`). No Airflow component is then a parent of the driver: restarting one never ends the stream.
"""
