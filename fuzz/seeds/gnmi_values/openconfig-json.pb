
ª"∂
$"
 openconfig-interfaces:interfacesçZä{"openconfig-interfaces:interface": [{"name": "Ethernet0", "state": {"oper-status": "LOWER_LAYER_DOWN", "counters": {"in-octets": "7"}}}]}