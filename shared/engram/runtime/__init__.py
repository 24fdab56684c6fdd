"""Process runtimes: the JetStream pull runner and the shared HTTP pieces."""
