"""ccl-doctor: checks every rank's host before a job's first step and says what to fix.

    torchrun --nnodes 2 --nproc-per-node 4 ... -m ccl_doctor      (or: ccl-doctor under srun / mpiexec)
    python -m oneccl_bindings_for_pytorch.doctor                   (the same, under the original's name)

Every rank reports its host, cores, NUMA nodes, CPU affinity, threads, /dev/shm, versions and the network
interface oneCCL will use, through the launcher's store (no oneCCL yet: a broken set-up cannot hang the check).
The hosts then probe each other on that interface and time a TCP stream between them; if every host reaches every
other, a real `ccl` group is made and times all_reduce inside each host and between hosts. Rank 0 prints what it
found per host and for the job, each problem with its fix. The exit status is 1 on every rank when there is a
problem, 0 otherwise.
"""
