# Puts the project root on sys.path so `import webapp` works under plain `pytest`.
