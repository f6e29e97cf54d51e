"""The offline demo's base policy: its build (teach, teach_data) and its card (artifact). See README.md."""
