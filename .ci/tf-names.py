#!/usr/bin/env python3
"""tf-names: read two `terraform show -json` plans of one project and fail if
any resource both would create carries the same name (tf-two-envs)."""
import json
import sys

# The arguments that name a resource in its project.
NAME_ATTRS = ("name", "account_id", "secret_id", "repository_id", "role_id", "database")
# Shared on purpose: enabling an API is idempotent, and neither environment
# disables one on destroy (disable_on_destroy = false).
SHARED = {"google_project_service"}
# Resources named within a parent: the parent is part of the name.
PARENT = {"google_storage_bucket_object": "bucket"}


def names(path):
    with open(path) as f:
        plan = json.load(f)
    project = plan.get("variables", {}).get("project_id", {}).get("value")
    out = {}
    for rc in plan.get("resource_changes", []):
        if rc.get("mode") != "managed" or rc["type"] in SHARED or rc["type"].endswith(("_iam_member", "_iam_binding")):
            continue
        after = (rc.get("change") or {}).get("after") or {}
        for attr in NAME_ATTRS:
            v = after.get(attr)
            if isinstance(v, str) and v:
                # Firestore indexes and fields name their database; the name
                # of the resource itself is what counts there.
                if attr == "database" and rc["type"] != "google_firestore_database":
                    continue
                if rc["type"] in PARENT:
                    v = f'{after.get(PARENT[rc["type"]])}/{v}'
                out.setdefault((rc["type"], attr, v), []).append(rc["address"])
    return project, out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tf-names.py PLAN_A.json PLAN_B.json")
    (pa, a), (pb, b) = names(sys.argv[1]), names(sys.argv[2])
    if pa != pb:
        sys.exit(f"tf-names: the plans are of different projects ({pa}, {pb}): nothing to compare")
    if len(a) < 20 or len(b) < 20:
        sys.exit(f"tf-names: too few named resources ({len(a)}, {len(b)}): is the plan complete?")
    shared = sorted(set(a) & set(b))
    for key in shared:
        print(f"shared {key[0]} {key[1]} = {key[2]!r}: {a[key]} and {b[key]}")
    if shared:
        sys.exit(f"tf-names: {len(shared)} resource names shared by the two environments of {pa}")
    print(f"== two environments of {pa}: {len(a)} and {len(b)} named resources, none shared")


if __name__ == "__main__":
    main()
