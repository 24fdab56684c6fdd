"""Operations: migrations, the stream topology, provisioning and the `engram` command line."""
