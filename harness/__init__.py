"""Dev-only machinery shared by the tests and the benchmarks: one way to start a gateway
(gateway.py), a local cluster (cluster.py) and a throwaway Ceph RGW (ceph.py), and the S3
endpoints, clients, load tools, process helpers and result output they use.

Roles, one per module:

    ports.py       free and busy TCP ports on this machine
    processes.py   child processes: the lakegate command and its clean environment, stopping,
                   cleanup at exit, CPU meters, progress lines
    units.py       KiB, MiB, GiB
    endpoints.py   S3 endpoints, tenants, conformance targets with boto3 clients, test buckets
    gateway.py     one `lakegate serve` process
    cluster.py     several nodes through `lakegate cluster up|down`
    ceph.py        a throwaway Ceph RGW (deploy/ceph) and the RGW the environment names
    rgwlog.py      lake requests counted from RGW's access log
    clients.py     async signing S3 clients for load (raw sockets, httpx)
    load.py        wrk and py-spy beside a running server
    results.py     statistics, machine facts and the one JSON result of a benchmark

Nothing in gateway/, cachetier/, policies/ or tools/ imports harness; harness may import them.
"""
