# The api's max_instances sized by Terraform from the declared rate.
expected_lifecycles_per_second = 10000
