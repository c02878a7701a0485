"""The MariaDB engine."""
