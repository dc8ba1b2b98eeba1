# A deployment for bench/scale's tests (deployment_test.go): every
# variable the model reads, set.
due_shards = 1024
region     = "asia-south1"
sweep_every = "10s"
quota_shards = 16

functions = {
  api = { max_instances = 50 }
}

tenant_quotas = {
  acme  = { peak_rate = 2000, max_running = 50000 }
  small = { max_running = 5 }
  "*"   = { max_queued = 100000 }
}

workers = {
  render = {
    image = "example"
    queue = { max_dispatches_per_second = 2000 }
  }
  thumbs = {
    image = "example"
  }
}
