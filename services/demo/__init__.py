"""`gridledger demo`: a whole local installation running the failure modes users meet."""
