
£"ž
&

COUNTERS
	Ethernet*"COUNTERS_DBtZr{"Ethernet0": {"SAI_PORT_STAT_PFC_9_RX_PKTS": "1"}, "Ethernet0:99999999999": {"SAI_PORT_STAT_PFC_3_RX_PKTS": "x"}}