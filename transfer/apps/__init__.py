"""End-to-end workflows the command line offers: the demo and the HTML report."""
