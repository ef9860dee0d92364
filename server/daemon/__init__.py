"""The daemon: LSP sessions over stdio/TCP, the folder watcher, the results store, its CLI."""
