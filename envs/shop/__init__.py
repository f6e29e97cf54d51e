"""The built-in target environment `shop`: own data, policy, tools, tasks, scripted user."""

from gapforge.envs.shop.env import ShopEnv

__all__ = ["ShopEnv"]
