
Õ9

interfaces 
	interface
nameEthernet1/1
state"

oper-status
UP"


counters
	in-octets" 


counters

out-errors"

description
b uplink *

counters
in-discards