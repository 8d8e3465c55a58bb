"""The stages a page goes through after the upload, and the one function that takes it through them."""
