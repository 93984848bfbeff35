
Î"É
&

COUNTERS
	Ethernet*"COU