"""The Moreau family's round loops as they stood at deb7334, before the fast path (fused oracle steps,
the wide model, CUDA graphs): the plain oracle's gradients and each method's own ``_foreach``
arithmetic.  Frozen here as the reference that ``tests/test_moreau_fast_path.py`` checks the fast
path against and that ``benchmarks/moreau_round.py`` times it against.  Their minibatches come from
the federation's per-client ``minibatches`` streams, as the fast path's do (common random numbers,
:mod:`fedbench.engine.streams`), so that the two compare arithmetic, not draws."""

from __future__ import annotations

import torch

import fedbench.algorithms.pfedmt as pfedmt_module
from fedbench.engine.weights import broadcast, parameter_names, rows


def pfedme_round(algo, fed, state, round_=None):
    x = state["global"]
    names = parameter_names(fed.model)
    everyone = torch.arange(fed.num_clients, device=fed.device)
    oracle = fed.minibatch_gradients()
    w = broadcast({n: x[n] for n in names}, fed.num_clients)
    theta = {n: v.clone() for n, v in w.items()}
    buffers = fed.client_buffers(x, fed.num_clients)
    th, wl = list(theta.values()), list(w.values())
    batches = oracle.draw(algo.local_steps, everyone, fed.client_streams("minibatches", everyone))
    loss_sum = torch.zeros(fed.num_clients, device=fed.device)
    pull, eta = algo.personal_lr * algo.lam, fed.local.lr * algo.lam
    with torch.no_grad():
        for r in range(algo.local_steps):
            for _ in range(algo.inner_steps):
                grads, loss = oracle(theta, batches[r], everyone, buffers)
                g = [grads[n] for n in theta]
                if algo.mu:
                    torch._foreach_add_(g, th, alpha=algo.mu)
                torch._foreach_lerp_(th, wl, pull)
                torch._foreach_add_(th, g, alpha=-algo.personal_lr)
                loss_sum += loss
            torch._foreach_lerp_(wl, th, eta)
        chosen = fed.sample_clients()
        average = fed.average(rows({**w, **buffers}, chosen), chosen)
        new_global = {k: torch.lerp(x[k], v, algo.beta) if v.is_floating_point() else v for k, v in average.items()}
    personal = {**state["personal"], **(theta if algo.personal_model == "theta" else w), **buffers}
    return {"global": {**x, **new_global}, "personal": personal}, loss_sum / (algo.local_steps * algo.inner_steps)


def perfedavg_round(algo, fed, state, round_=None):
    x = state["global"]
    names = parameter_names(fed.model)
    chosen = fed.sample_clients()
    oracle = fed.minibatch_gradients()
    theta = broadcast({n: x[n] for n in names}, len(chosen))
    buffers = fed.client_buffers(x, len(chosen))
    batches = oracle.draw(2 * algo.local_steps, chosen, fed.client_streams("minibatches", chosen))
    loss_sum = torch.zeros(len(chosen), device=fed.device)
    with torch.no_grad():
        for r in range(algo.local_steps):
            grads, loss = oracle(theta, batches[2 * r], chosen, buffers)
            temp = dict(zip(names, torch._foreach_add(list(theta.values()), [grads[n] for n in names], alpha=-fed.local.lr)))
            meta, _ = oracle(temp, batches[2 * r + 1], chosen, buffers)
            torch._foreach_add_(list(theta.values()), [meta[n] for n in names], alpha=-algo.beta)
            loss_sum += loss
    return {"global": {**x, **fed.average({**theta, **buffers}, chosen)}}, loss_sum / algo.local_steps


def sgd_steps(fed, start, clients, steps):
    oracle = fed.minibatch_gradients()
    names = parameter_names(fed.model)
    theta = {n: start[n].clone() for n in names}
    buffers = {k: v.clone() for k, v in start.items() if k not in theta}
    batches = oracle.draw(steps, clients, fed.client_streams("minibatches", clients))
    loss_sum = torch.zeros(len(clients), device=fed.device)
    with torch.no_grad():
        for s in range(steps):
            grads, loss = oracle(theta, batches[s], clients, buffers)
            torch._foreach_add_(list(theta.values()), [grads[n] for n in theta], alpha=-fed.local.lr)
            loss_sum += loss
    return {**start, **theta, **buffers}, loss_sum / max(steps, 1)


def pfedmt_device_step(fed, single, team_iterations, local_iterations, alpha, dlam):
    """The device step before: gradient from the plain oracle, Eq. (10) by three ``_foreach`` updates."""
    gradient, buffers = pfedmt_module.minibatch_device_gradient(fed, single, local_iterations)
    return pfedmt_module.gradient_device_step(gradient, alpha, dlam), buffers
