"""One engine-resident duplex session and everything that runs it."""
