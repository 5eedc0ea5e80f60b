"""The notary: Ed25519-signed seals over the ledger's records, and their verification.

``chain`` (seals, leaves, the hash chain) and ``findings`` (what differs from the
seals) are pure; ``service`` is the processor that seals, ``verify`` is
``gridledger audit verify``, ``keys`` and ``store`` hold the keys and the seals' copy
in the object store. README "Audit" says what the seals prove and what they do not.
"""
