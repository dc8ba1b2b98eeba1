due_shards = "many"
