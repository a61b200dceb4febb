// What a faster path among same-host ranks (the shared-memory path) lends to every wait on the oneCCL engine.
#pragma once

namespace ccl_core {

class LocalPath {
public:
    virtual ~LocalPath() = default;
    // Advances the path's own queued ops: a peer may wait on this rank's part of one while this rank waits on oneCCL.
    virtual void drive() = 0;
    // Records the core this rank runs on, for peer_on_my_core() of the others.
    virtual void note_my_core() = 0;
    // True when a same-host peer last ran on this core: it cannot progress while this rank polls.
    virtual bool peer_on_my_core() const = 0;
};

}  // namespace ccl_core
