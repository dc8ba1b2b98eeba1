region     = "europe-west1"
due_shards = var.shards
