"""A job's environment: provisioning (setup, requirements), its interpreter and PATH."""
