"""Run under mpirun -np 2 SCRATCH_DIR: DeepSpeed checkpoints saved by 2 DeepSpeed ranks
(tests/data/deepspeed-ckpt, ZeRO 1-3) are loaded by 2 dsrt ranks through the front's
load_checkpoint (rank 0 imports, both load, at dsrt's stage 3 whatever DeepSpeed's was), which
then train the 2 steps DeepSpeed trained after its save, each rank on its DeepSpeed rank's
micro-batches: the mean loss and the masters follow DeepSpeed's (fp32: 1e-5). Exits non-zero on
any mismatch."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.environ.get("DSRT_BUILD_DIR", "build"), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import dsrt  # noqa: E402
from test_ds_checkpoint import DATA, make_model, param_groups  # noqa: E402


def main():
    scratch = sys.argv[1]
    comm = dsrt.Comm.from_env()
    rank, world = comm.rank, comm.world_size
    assert world == 2
    failures = []
    for case, dsrt_stage in (("fp32-stage1-w2", 3), ("fp32-stage2-w2", 2), ("fp32-stage3-w2", 1)):
        want = torch.load(os.path.join(DATA, case, "expected.pt"))
        folder = os.path.join(scratch, case)
        if rank == 0:
            shutil.copytree(os.path.join(DATA, case, "ckpt"), folder)
        comm.barrier()
        config = json.loads(want["config"])
        config["zero_optimization"] = {"stage": dsrt_stage}
        model = make_model()
        engine, _, _, _ = dsrt.initialize(model=model, model_parameters=param_groups(model, want["grouped"]),
                                          config=config, comm=comm)
        engine.load_checkpoint(folder)
        losses = []
        for step in (3, 4):
            x, y = want["batches"][step][rank]
            loss = torch.nn.functional.mse_loss(engine(x), y)
            engine.backward(loss)
            engine.step()
            losses.append(float(loss))
        for s in range(2):
            theirs = want["continue_losses"][rank][s]
            if abs(losses[s] - theirs) > 1e-5 * abs(theirs):
                failures.append("%s rank %d step %d: loss %r, DeepSpeed %r" % (case, rank, s, losses[s], theirs))
        for name in want["names"]:
            mine = engine.get_fp32_param(name).double()
            ref = want["continue_masters"][name].double()
            moved = (ref - want["masters"][name].double()).norm()
            err = float((mine - ref).norm() / moved)
            if err > 1e-4:
                failures.append("%s rank %d %s: update off by %.2e" % (case, rank, name, err))
        engine.close()
        comm.barrier()
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    if rank == 0:
        print("2 dsrt ranks continued 3 DeepSpeed 2-rank checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
