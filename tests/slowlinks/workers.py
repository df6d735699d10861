"""Workers for the chapter-10 tests (importable by the launcher's fork server as
``tests.slowlinks.workers``)."""


def streaming_resume_worker(rank, world_size, batches, period, options, cuts):
    """Streaming DiLoCo (inner SGD with momentum and weight decay) over ``batches``, and the
    same run stopped after each step of ``cuts``: its model and optimizer state dicts saved
    (through ``torch.save`` bytes, as a checkpoint file would) and loaded into a fresh
    model and optimizer that finish the run (the uninterrupted run takes a state_dict() at
    every step, as a checkpointing run would). The whole parameters at the end of each."""
    import io

    import torch

    from companion.runtime.group import rank_device
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import _share_step
    from companion.slowlinks import StreamingDiLoCo
    from companion.slowlinks.verify import _bare

    device = rank_device()

    def built():
        net, inner = _bare("SGD momentum")
        return net, StreamingDiLoCo(inner, period, **options)

    def train(net, opt, part):
        for X, y in part:
            _share_step(net, opt, X.to(device), y.to(device))

    net, opt = built()
    for X, y in batches:
        _share_step(net, opt, X.to(device), y.to(device))
        opt.state_dict()  # a checkpoint taken at every step leaves the run as it was
    out = {"uninterrupted": full_parameters(net, opt)}
    for cut in cuts:
        net, opt = built()
        train(net, opt, batches[:cut])
        file = io.BytesIO()
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, file)
        file.seek(0)
        saved = torch.load(file, weights_only=True)
        net, opt = built()
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        train(net, opt, batches[cut:])
        out[cut] = full_parameters(net, opt)
    return out
