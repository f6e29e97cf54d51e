"""The built-in target environment `shop`: own data, policy, tools, tasks, scripted user."""

from envs.shop.env import ShopEnv

__all__ = ["ShopEnv"]
