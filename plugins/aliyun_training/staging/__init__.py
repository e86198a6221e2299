"""The copy engine that stages dataset versions from an object store onto a filesystem."""
