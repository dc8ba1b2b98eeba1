# Applied after target.tfvars: the last file setting a variable wins.
due_shards = 2048
