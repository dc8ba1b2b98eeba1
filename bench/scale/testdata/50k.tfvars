# Issue 53's larger target: 50 000 tasks/s, 5 000 000 running, a tenant
# with 30 % of the submits, no worker above 30 % of the tasks, the
# project's Pub/Sub publisher quota raised to 500 MB/s on request:
#
#   go run ./bench/scale -var-file bench/scale/testdata/50k.tfvars \
#     -submits 50000 -completions 50000 -running 5000000 -hot-share 0.3 \
#     -big-worker-share 0.3 -publish-quota-mb 500
#
# The variables the model reads, raised for it:
#
# due_shards: 5 × the default target's load needs about 5 × 512 shards
# for the lease and outbox due ranges at the peak; 2048 holds them under
# 500 entries/s (about 380).
due_shards = 2048

# The api and the callbacks sized by Terraform for the declared rate
# (main.tf's function_max_instances): the api gets twice the instances
# 50 000 lifecycles/s need, 610, and SERVO_RUN_DOCUMENT_EVERY 20m20s
# (2 s a process), so a busy run's document is written about every 2 s.
expected_lifecycles_per_second = 50000

# The most counter shards a scope without a peak rate (a tenant's share
# of a limited worker) may have.
quota_shards = 64

# The hot tenant declares its peak, 2 × 15 000 tasks/s: 150 000 counter
# shards (5 writes a task, one a second each), each owning at least 2 of
# max_running (1 500 000 running at its rate with 100 s tasks).
tenant_quotas = {
  acme = { peak_rate = 30000, max_running = 2000000 }
}

# The big worker (30 % of the tasks: 15 000/s, 45 000 dispatches/s at the
# peak, 1.5 a task) under the most Terraform allows a worker: 50 000
# dispatches/s, 100 queues of 500. A worker with half of 50 000 tasks/s
# would need 150: split it into two workers.
workers = {
  render = {
    image         = "us-central1-docker.pkg.dev/my-servo/servo/render:v1"
    concurrency   = 80
    max_instances = 1000
    queue         = { max_dispatches_per_second = 50000 }
  }
}
