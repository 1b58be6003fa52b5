"""Layer 1, the bottom: errors meant for users, reading and writing files, text decoding, the command-line value
types, the heap. Imports nothing of bertforge."""
