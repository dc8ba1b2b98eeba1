#!/usr/bin/env python3
"""tf-key-state: print a Terraform state (v4) holding only the key ring's
records of modules/signing_keys: the current activation (ACTIVE became
active HOURS ago with the ring IDS) and each kid's creation, as an apply
HOURS ago would have left them (tf-key-guard).

    tf-key-state.py HOURS IDS ACTIVE      e.g. 1 k1,k2 k2
"""
import json, sys, datetime
ago_h = float(sys.argv[1]); ids = sys.argv[2].split(","); active = sys.argv[3]
at = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=ago_h)).strftime("%Y-%m-%dT%H:%M:%SZ")
dyn = lambda v, t: {"value": v, "type": t}
act = {"kid": active, "at": at, "ids": ids}
act_t = ["object", {"at": "string", "ids": ["list", "string"], "kid": "string"}]
prov = 'provider["terraform.io/builtin/terraform"]'
res = [{"module": "module.signing_keys", "mode": "managed", "type": "terraform_data", "name": "activation", "provider": prov,
        "instances": [{"index_key": 0, "schema_version": 0, "attributes": {"id": "act", "input": dyn(act, act_t), "output": dyn(act, act_t), "triggers_replace": dyn([active], ["tuple", ["string"]])}}]},
       {"module": "module.signing_keys", "mode": "managed", "type": "terraform_data", "name": "created", "provider": prov,
        "instances": [{"index_key": k, "schema_version": 0, "attributes": {"id": "c" + k, "input": dyn(at, "string"), "output": dyn(at, "string"), "triggers_replace": None}} for k in ids]}]
print(json.dumps({"version": 4, "terraform_version": "1.5.7", "serial": 1, "lineage": "00000000-0000-0000-0000-000000000000", "outputs": {}, "resources": res}))
