"""Enclaves across the hosts of a Docker Swarm: the Swarm reconciler, its provisioner, release shipping, service specs
and the overlay encryption check."""
