"""A Kubernetes-compatible cluster on one machine: API server, scheduler, controllers, kubelets, cloud.

The models mutate the object store directly and are driven by an `Engine` (timers on a `Clock`);
the HTTP API server is a thin layer over the same store, so the models run both behind the real
Kubernetes REST API and in-process in discrete-event mode (what-if simulation).
"""
