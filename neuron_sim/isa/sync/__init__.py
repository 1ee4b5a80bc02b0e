"""SyncE instructions: synchronisation between programs."""
