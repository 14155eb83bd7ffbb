"""The store's files: content-addressed blobs and durable writes, tensors and sparse snapshots, the access-trace
format and its lane decoders, output files. No SQL.
"""
