"""The mutating admission webhook: pure mutators, AdmissionReview handling, and its HTTPS server."""
