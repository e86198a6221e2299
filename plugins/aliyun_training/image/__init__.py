"""The training image: build context and tag, builds (kaniko, ACR), registry checks, verification."""
