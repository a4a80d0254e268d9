"""Frame formats the lab puts on the wire, apart from who sends them: RoCEv2 (roce) and PFC
(pfc)."""
