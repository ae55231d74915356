"""Production deployment files (compose, Kubernetes, systemd) and the topic set-up command."""
